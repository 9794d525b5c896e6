package tools_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sync/errgroup"

	"github.com/oma-sandbox/oma-sandbox/agentwire"
	"github.com/oma-sandbox/oma-sandbox/bashproto"
	"github.com/oma-sandbox/oma-sandbox/egress"
	"github.com/oma-sandbox/oma-sandbox/internal/sessiontest"
	"github.com/oma-sandbox/oma-sandbox/session"
	"github.com/oma-sandbox/oma-sandbox/session/local"
	"github.com/oma-sandbox/oma-sandbox/tools"
)

// The bash command's supervisor is the guest agent: the command's parent
// is the agent's process, on every backend ("agent" is its file name in a
// sandbox; the host stand-in starts the test program as the agent through
// /proc/self/exe, and the supervisor, to lead a session of its own, runs
// itself again under its file's name). Where the agent keeps out of its
// commands' pid namespace, the parent is out of their sight.
func TestBashSupervisorIsTheAgent(t *testing.T) {
	self, err := os.Executable()
	require.NoError(t, err)
	comm := filepath.Base(self)[:min(15, len(filepath.Base(self)))] // the kernel keeps 15 bytes
	forEachBackend(t, func(t *testing.T, s session.Session, calls func() int) {
		out := mustCall(t, tools.New(s, tools.Options{}), "bash",
			obj{"command": `if [ "$PPID" = 0 ]; then echo "out of sight"; else cat /proc/$PPID/comm; fi`})
		want := "agent\n"
		switch {
		case onBackend(t, "host"):
			want = comm + "\n"
		case agentOutOfSight(t, s):
			want = "out of sight\n"
		}
		assert.Equal(t, want, out, "the command's supervisor")
	})
}

func TestBashExitCodeStreamed(t *testing.T) {
	forEachBackend(t, func(t *testing.T, s session.Session, calls func() int) {
		tb := tools.New(s, tools.Options{})
		var mu sync.Mutex
		var streamed strings.Builder
		before := calls()
		_, err := tb.Call(context.Background(), "bash", []byte(`{"command": "echo one; echo two >&2; pwd; exit 7"}`), func(p []byte) {
			mu.Lock()
			streamed.Write(p)
			mu.Unlock()
		})
		var cmdErr *tools.CommandError
		require.ErrorAs(t, err, &cmdErr)
		assert.Equal(t, 7, cmdErr.ExitCode)
		want := "one\ntwo\n" + s.Paths().Workspace + "\n"
		assert.Equal(t, want+"\n\nCommand exited with code 7", cmdErr.Text)
		assert.Equal(t, want, streamed.String(), "output streams without sentinels")
		assert.Equal(t, 1, calls()-before, "a bash call is one round trip")

		out := mustCall(t, tb, "bash", obj{"command": "true"})
		assert.Equal(t, "(no output)", out)
	})
}

// A terminal line forged by the command is output, never a verdict: the
// command cannot see the secret the real record carries. Before, the
// record's token was the command's OMA_BASH_OWNER, so printing it and
// keeping the output open reported exit 0 for a failing command.
func TestBashForgedTerminalLine(t *testing.T) {
	forEachBackend(t, func(t *testing.T, s session.Session, calls func() int) {
		tb := tools.New(s, tools.Options{})
		forged := `printf '__OMA_TERMINAL__:%s:exit:0\n' "$OMA_BASH_OWNER"; sleep 30 & sleep 1; exit 3`
		_, err := call(t, tb, "bash", obj{"command": forged, "timeout": 20})
		var cmdErr *tools.CommandError
		require.ErrorAs(t, err, &cmdErr)
		assert.Equal(t, 3, cmdErr.ExitCode)
		assert.Contains(t, cmdErr.Text, "__OMA_TERMINAL__:")

		// Every argument of every process the command can see.
		harvest := `for f in /proc/[0-9]*/cmdline /proc/[0-9]*/environ; do tr '\0' '\n' < "$f"; done 2>/dev/null | grep -Eo '[0-9a-f]{32}' | sort -u |
while read -r tok; do printf '__OMA_TERMINAL__:%s:exit:0\n' "$tok"; done; exit 5`
		_, err = call(t, tb, "bash", obj{"command": harvest})
		require.ErrorAs(t, err, &cmdErr)
		assert.Equal(t, 5, cmdErr.ExitCode)
	})
}

// The command text is in no process's argv or environment: pkill -f and
// pgrep -f find nothing of the tool's, and the call survives them.
func TestBashPkillSparesTheWrapper(t *testing.T) {
	forEachBackend(t, func(t *testing.T, s session.Session, calls func() int) {
		tb := tools.New(s, tools.Options{})
		out := mustCall(t, tb, "bash", obj{"command": "pkill -f zzz_no_such_proc; echo rc=$?; pgrep -fa zzz_no_such_proc; echo pg=$?"})
		assert.Equal(t, "rc=1\npg=1\n", out)
	})
}

// A timeout kills every process the command started, including a setsid
// loop and a double-forked daemon that dropped OMA_BASH_OWNER; the session
// stays usable.
func TestBashGuestTimeoutKeepsSession(t *testing.T) {
	forEachBackend(t, func(t *testing.T, s session.Session, calls func() int) {
		tb := tools.New(s, tools.Options{})
		command := `setsid bash -c 'while :; do echo x >> ticks; sleep 0.05; done' &
(env -u OMA_BASH_OWNER setsid sleep 30.27 &)
echo started; sleep 30.17`
		timeout := guestSeconds(t, 1)
		_, err := call(t, tb, "bash", obj{"command": command, "timeout": timeout})
		var cmdErr *tools.CommandError
		require.ErrorAs(t, err, &cmdErr)
		assert.True(t, cmdErr.TimedOut)
		assert.Equal(t, fmt.Sprintf("started\n\n\nCommand timed out after %d seconds", timeout), cmdErr.Text)
		assert.False(t, s.Poisoned())
		assert.Equal(t, "ok", mustCall(t, tb, "bash", obj{"command": "printf ok"}), "the session is still usable")
		assert.Equal(t, "0\n", sh(t, s, `ps -eo args | grep -c '[s]leep 30.[12]7' || true`), "the command's processes are gone")
		size := sh(t, s, `wc -c < ticks`)
		time.Sleep(300 * time.Millisecond)
		assert.Equal(t, size, sh(t, s, `wc -c < ticks`), "the setsid loop stopped writing")
	})
}

// A host deadline or an abort kills every process the command started, through
// its supervisor, even one that left its group and dropped OMA_BASH_OWNER.
func TestBashHostTimeoutAndAbortKillGuest(t *testing.T) {
	forEachBackend(t, func(t *testing.T, s session.Session, calls func() int) {
		tb := tools.New(s, tools.Options{})
		for _, c := range []struct {
			name string
			ctx  func() (context.Context, context.CancelFunc)
			want error
		}{
			{"host timeout", func() (context.Context, context.CancelFunc) {
				return context.WithTimeout(context.Background(), 1500*time.Millisecond)
			}, session.ErrAborted},
			{"abort", func() (context.Context, context.CancelFunc) {
				ctx, cancel := context.WithCancel(context.Background())
				time.AfterFunc(1500*time.Millisecond, cancel)
				return ctx, cancel
			}, session.ErrAborted},
		} {
			ctx, cancel := c.ctx()
			_, err := tb.Call(ctx, "bash", []byte(`{"command": "(sleep 41.3 &) ; setsid sleep 42.3 & (env -u OMA_BASH_OWNER setsid sleep 44.3 &); sleep 43.3", "timeout": 60}`), nil)
			cancel()
			assert.ErrorIs(t, err, c.want, c.name)
			assert.Equal(t, "0\n", sh(t, s, `ps -eo args | grep -c '[s]leep 4[1234].3' || true`), "%s: no guest process left", c.name)
		}
		assert.False(t, s.Poisoned())
	})
}

// A background process never holds the call: its output goes to a log in
// /tmp named in the result. Where the session's sandbox outlives its calls
// (msb, local's resident sandbox, the host) it keeps running and writing
// there, as on any machine; in a sandbox per call it dies with the call.
// The tool's description, which the model reads, names the note each gives.
func TestBashBackgroundOutlivesCall(t *testing.T) {
	var description string
	for _, def := range tools.Definitions() {
		if def.Name == "bash" {
			description = def.Description
		}
	}
	forEachBackend(t, func(t *testing.T, s session.Session, calls func() int) {
		tb := tools.New(s, tools.Options{})
		// The loop starts its sleep only after its last line, which may be
		// after the test's last look: try for a while, so it never outlives
		// the test (on local it died with the call).
		if sharesSandbox(s) {
			t.Cleanup(func() {
				sh(t, s, `for i in $(seq 50); do pkill -f '^sleep 300.7' && exit 0; sleep 0.1; done; true`)
			})
		}
		began := time.Now()
		out := mustCall(t, tb, "bash", obj{"command": "(for i in $(seq 30); do echo line$i; sleep 0.05; done; sleep 300.7) & echo started", "timeout": 60})
		assert.Less(t, time.Since(began), 10*time.Second, "the background loop did not hold the call")
		// The loop's first lines may come before "started": the order is
		// the scheduler's (a slow guest has shown it).
		if !sharesSandbox(s) {
			assert.Contains(t, strings.Split(out, "\n"), "started", "%q", out)
			assert.True(t, strings.HasSuffix(out, "\n\n[Background processes were killed: on this sandbox nothing outlives the call]\n"), "%q", out)
			assert.Contains(t, description, `"[Background processes were killed: …]"`)
			return
		}
		assert.Contains(t, description, `"[Background processes are still running; …]"`)
		head, note, ok := strings.Cut(out, "\n\n[Background processes are still running; their output goes to ")
		require.True(t, ok, out)
		assert.Contains(t, strings.Split(head, "\n"), "started", "%q", head)
		log := strings.TrimSuffix(note, "]\n")
		assert.Regexp(t, `^/tmp/oma-bash/[0-9a-f]{32}\.log$`, log)
		require.Eventually(t, func() bool {
			return strings.Contains(sh(t, s, `cat "$1" 2>/dev/null || true`, log), "line30\n")
		}, 20*time.Second, 100*time.Millisecond, "the loop kept writing after the call returned")
	})
}

// timeout 0 means the default, as in the seed; out-of-range or mistyped
// values are refused before anything runs.
func TestBashTimeoutInput(t *testing.T) {
	forEachBackend(t, func(t *testing.T, s session.Session, calls func() int) {
		tb := tools.New(s, tools.Options{})
		assert.Equal(t, "ok\n", mustCall(t, tb, "bash", obj{"command": "echo ok", "timeout": 0}))
		before := calls()
		for _, in := range []string{`{"command": "true", "timeout": -1}`, `{"command": "true", "timeout": 3601}`, `{"command": "true", "timeout": "5"}`} {
			_, err := tb.Call(context.Background(), "bash", []byte(in), nil)
			assert.EqualError(t, err, "bash timeout must be an integer from 0 through 3600 seconds")
		}
		_, err := tb.Call(context.Background(), "bash", []byte(`{}`), nil)
		assert.True(t, errors.Is(err, tools.ErrInvalidInput))
		_, err = tb.Call(context.Background(), "bash", []byte(`{"command": "echo a\u0000b"}`), nil)
		assert.EqualError(t, err, "bash command must not contain a NUL byte")
		assert.Equal(t, 0, calls()-before)
	})
}

// seq 1 100000 returns its last 2000 lines with the seed's note; the whole
// output streams live and is in the file the note names.
func TestBashOutputTruncated(t *testing.T) {
	forEachBackend(t, func(t *testing.T, s session.Session, calls func() int) {
		tb := tools.New(s, tools.Options{})
		var mu sync.Mutex
		streamed := 0
		out, err := tb.Call(context.Background(), "bash", []byte(`{"command": "seq 1 100000"}`), func(p []byte) {
			mu.Lock()
			streamed += len(p)
			mu.Unlock()
		})
		require.NoError(t, err)
		assert.Equal(t, 588895, streamed, "progress carries everything")
		body, note, ok := strings.Cut(out, "\n\n[Showing lines 98002-100001 of 100001. Full output: ")
		require.True(t, ok, "note missing: %.200q", out[max(len(out)-200, 0):])
		assert.True(t, strings.HasPrefix(body, "98002\n98003\n"), "%.40q", body)
		assert.True(t, strings.HasSuffix(body, "\n100000\n"))
		path := strings.TrimSuffix(note, "]")
		assert.Regexp(t, `^`+s.Paths().Workspace+`/\.bash-output/[0-9a-f]{32}\.log$`, path)
		first := mustCall(t, tb, "read", obj{"path": path, "limit": 2})
		assert.True(t, strings.HasPrefix(first, "1\n2"), "%.40q", first)
		assert.Equal(t, "588895\n", sh(t, s, `wc -c < "$1"`, path))

		out = mustCall(t, tb, "bash", obj{"command": "seq 1 10"})
		assert.Equal(t, "1\n2\n3\n4\n5\n6\n7\n8\n9\n10\n", out, "short output is whole, with no note")
	})
}

// No file of the tool's is in the workspace while a call runs or after it
// (the log of a call whose output fits is removed), and none is left in
// /tmp/oma-bash once nothing runs.
func TestBashLeavesNoState(t *testing.T) {
	forEachBackend(t, func(t *testing.T, s session.Session, calls func() int) {
		tb := tools.New(s, tools.Options{})
		before := sh(t, s, `ls -A`)
		out := mustCall(t, tb, "bash", obj{"command": "ls -A; echo --; ls -A /tmp/oma-bash | grep -c log"})
		if onBackend(t, "host") {
			out, _, _ = strings.Cut(out, "--\n") // the machine's /tmp is shared
			out += "--\n1\n"
		}
		assert.Equal(t, before+"--\n1\n", out, "only the call's own live log, outside the workspace")
		assert.Equal(t, before, sh(t, s, `ls -A`))
		if onBackend(t, "msb-channel") {
			// The host backend shares the machine's /tmp; local's is per call.
			assert.Equal(t, "", sh(t, s, `ls -A /tmp/oma-bash`))
		}
	})
}

// failingKill is a session whose kill exec cannot run (msb unreachable
// after an abort): nothing proves the command is gone.
type failingKill struct {
	session.Session
	poisoned atomic.Bool
}

func (f *failingKill) Shell(ctx context.Context, cmd session.Command, o session.ShellOptions) (*session.Result, error) {
	if cmd.Builtin == agentwire.BuiltinBashKill {
		return nil, errors.New("msb: connection refused")
	}
	return f.Session.Shell(ctx, cmd, o)
}

func (f *failingKill) Poison(context.Context, error) error {
	f.poisoned.Store(true)
	return nil
}

// A cleanup that fails leaves the guest's state unknown: the session is
// poisoned and the error says why. Before, it was only logged.
func TestBashFailedCleanupPoisons(t *testing.T) {
	host := sessiontest.NewHost(t)
	t.Cleanup(func() { sh(t, host, `pkill -f '^sleep 30.91' || true`) })
	s := &failingKill{Session: host}
	tb := tools.New(s, tools.Options{})
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(500*time.Millisecond, cancel)
	_, err := tb.Call(ctx, "bash", []byte(`{"command": "sleep 30.91"}`), nil)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "could not kill the command's processes: msb: connection refused")
	assert.True(t, s.poisoned.Load(), "the session is poisoned")
}

// A session wall-time limit that ends the call first is named, not the
// call's own timeout. A memory-limit kill is named the same way, from the
// backend's report.
func TestBashNamesTheSessionLimit(t *testing.T) {
	s, err := local.Create(context.Background(), local.Options{
		StateDir: t.TempDir(), WorkspaceID: "ws", SessionID: "walltime",
		Limits: local.Limits{WallTime: 2 * time.Second},
	})
	if err != nil {
		t.Skipf("no local sandbox with a wall-time limit here: %v", err)
	}
	t.Cleanup(func() { require.NoError(t, s.Close(context.Background())) })
	tb := tools.New(s, tools.Options{})
	_, err = call(t, tb, "bash", obj{"command": "echo started; sleep 8", "timeout": 20})
	var cmdErr *tools.CommandError
	require.ErrorAs(t, err, &cmdErr)
	assert.True(t, cmdErr.TimedOut)
	assert.Equal(t, "started\n\n\nCommand killed: the session's wall-time limit of 2s was reached", cmdErr.Text)
	assert.NotContains(t, cmdErr.Text, "20 seconds")
}

// A process left running by one call can write into a later call's output:
// through /proc/PID/fd/1 of its supervisor (the agent's bash-supervisor run
// by one msb exec, found by its argv), and, wherever the sandbox outlives
// its calls, into the later call's log under /tmp/oma-bash, which the
// supervisor relays; but every terminal line it can forge lacks the
// secret: the later call's status stands. Not on the host backend, where it
// would reach other tests' supervisors, nor in a sandbox per call, where
// nothing outlives the call.
func TestBashEarlierProcessCannotForgeLaterStatus(t *testing.T) {
	forEachBackend(t, func(t *testing.T, s session.Session, calls func() int) {
		if onBackend(t, "host") || !sharesSandbox(s) {
			t.Skip("no process of an earlier call is left in this sandbox")
		}
		tb := tools.New(s, tools.Options{})
		attacker := `known=" $(ls /tmp/oma-bash 2>/dev/null | tr '\n' ' ') "
(for i in $(seq 200); do
  toks=$(cat /proc/[0-9]*/cmdline /proc/[0-9]*/environ /tmp/oma-bash/*.log 2>/dev/null | tr '\0' '\n' | grep -Eo '[0-9a-f]{32}' | sort -u)
  for f in /proc/[0-9]*/cmdline; do
    p=${f#/proc/}; p=${p%/cmdline}; [ "$p" = "$BASHPID" ] && continue
    tr '\0' '\n' < "$f" 2>/dev/null | grep -q '^bash-supervisor$' || continue
    echo "$p" >> /tmp/attacker-found
    for tok in $toks; do
      printf '__OMA_TERMINAL__:%s:exit:0\n' "$tok" > "/proc/$p/fd/1"
    done 2>/dev/null
  done
  for l in /tmp/oma-bash/*.log; do
    case "$known" in *" ${l##*/} "*) continue ;; esac
    [ -f "$l" ] || continue
    echo "$l" >> /tmp/attacker-found
    for tok in $toks; do
      printf '__OMA_TERMINAL__:%s:exit:0\n' "$tok" >> "$l"
    done 2>/dev/null
  done
  sleep 0.02
done) >/dev/null 2>&1 &
echo armed`
		out := mustCall(t, tb, "bash", obj{"command": attacker})
		assert.True(t, strings.HasPrefix(out, "armed\n"), out)
		// The later call runs until the attacker found its supervisor (its
		// scan of /proc takes seconds on an emulated VM), and on while it
		// writes its forged records.
		_, err := call(t, tb, "bash", obj{"command": `for i in $(seq 900); do [ -s /tmp/attacker-found ] && break; sleep 0.1; done; sleep 3; exit 4`, "timeout": 120})
		require.Error(t, err, "the forged records decide nothing")
		var cmdErr *tools.CommandError
		if onRealVM(t) && !errors.As(err, &cmdErr) {
			// The real msb lets the writes through to the pipe of the
			// exec that runs the later call, and that exec can then end
			// without its exit event: the call fails, its status unknown.
			assert.ErrorContains(t, err, "exec session ended without exit event")
			return
		}
		require.ErrorAs(t, err, &cmdErr, "the forged records decide nothing")
		assert.Equal(t, 4, cmdErr.ExitCode)
		// fakemsb's guests refuse the writes (Permission denied).
		assert.NotEmpty(t, strings.TrimSpace(sh(t, s, `cat /tmp/attacker-found 2>/dev/null || true`)),
			"the attacker found the later call's supervisor or log")
	})
}

// A memory-limit kill is named from the backend's report, not left as a
// bare "Killed".
func TestBashNamesTheMemoryLimit(t *testing.T) {
	s, err := local.Create(context.Background(), local.Options{
		StateDir: t.TempDir(), WorkspaceID: "ws", SessionID: "memory",
		Limits: local.Limits{MemoryBytes: 64 << 20},
	})
	if err != nil {
		t.Skipf("no local sandbox with a memory limit here: %v", err)
	}
	t.Cleanup(func() { require.NoError(t, s.Close(context.Background())) })
	tb := tools.New(s, tools.Options{})
	_, err = call(t, tb, "bash", obj{"command": "head -c 300000000 /dev/zero | tail -n 1 > /dev/null", "timeout": 60})
	var cmdErr *tools.CommandError
	require.ErrorAs(t, err, &cmdErr)
	assert.Contains(t, cmdErr.Text, "Session limit: memory limit of ")
	assert.Contains(t, cmdErr.Text, " reached")
}

// A destination the session's allowlist refused is named in the result.
func TestBashNamesRefusedDestinations(t *testing.T) {
	if _, err := exec.LookPath("curl"); err != nil {
		t.Skip("curl not installed")
	}
	target, err := egress.ParseTarget("127.0.0.1:9")
	require.NoError(t, err)
	s, err := local.Create(context.Background(), local.Options{
		StateDir: t.TempDir(), WorkspaceID: "ws", SessionID: "egress",
		Policy: local.Policy{Network: local.NetworkAllowlist, Allow: []egress.Target{target}},
	})
	if err != nil {
		t.Skipf("no local sandbox with an allowlist here: %v", err)
	}
	t.Cleanup(func() { require.NoError(t, s.Close(context.Background())) })
	tb := tools.New(s, tools.Options{})
	out := mustCall(t, tb, "bash", obj{"command": "curl -sS --max-time 5 http://example.invalid/; echo"})
	assert.Contains(t, out, "oma-sandbox egress: refused example.invalid:80: not in the allowlist")
	assert.Contains(t, out, "Network: egress refused example.invalid:80: not in the allowlist")
}

// earlyEnd is a session whose bash supervisor calls end after a second
// with nothing of the supervisor's records, while the guest goes on, as
// the real msb's exec can end when a guest process writes into its pipe.
type earlyEnd struct {
	session.Session
	wg sync.WaitGroup
}

func (e *earlyEnd) Shell(ctx context.Context, cmd session.Command, o session.ShellOptions) (*session.Result, error) {
	if cmd.Builtin != agentwire.BuiltinBashSupervisor {
		return e.Session.Shell(ctx, cmd, o)
	}
	o.Stdout, o.Stderr = nil, nil
	e.wg.Go(func() {
		ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 20*time.Second)
		defer cancel()
		_, _ = e.Session.Shell(ctx, cmd, o)
	})
	time.Sleep(time.Second)
	return &session.Result{}, nil
}

// A call that ended without its supervisor's records has whatever of its
// command may still run killed, as a failed call has.
func TestBashWithoutRecordsKillsTheCommand(t *testing.T) {
	s, _ := openMsbChannel(t)
	early := &earlyEnd{Session: s}
	t.Cleanup(early.wg.Wait)
	_, err := call(t, tools.New(early, tools.Options{}), "bash", obj{"command": "sleep 300.61 & sleep 300.62"})
	require.ErrorIs(t, err, bashproto.ErrNoDispatch)
	assert.Equal(t, "0\n", sh(t, s, `ps -eo args | grep -c '[s]leep 300.6' || true`), "the command's processes are gone")
}

// wordlessKill is a session whose first bash-kill ends with status 255
// and no word, as the real msb's exec of one has been seen to end.
// wordlessCleanup ends the first cleanup command it is given with 255 and
// no word, as the real msb's exec has been seen to end just after a command
// the host cut short.
type wordlessCleanup struct {
	session.Session
	isCleanup func(session.Command) bool
	wordless  int32 // how many cleanups end so; 0 means one
	cleanups  atomic.Int32
}

func (w *wordlessCleanup) Shell(ctx context.Context, cmd session.Command, o session.ShellOptions) (*session.Result, error) {
	if w.isCleanup(cmd) && w.cleanups.Add(1) <= max(w.wordless, 1) {
		return &session.Result{ExitCode: 255}, nil
	}
	return w.Session.Shell(ctx, cmd, o)
}

// A kill that ends without a word is sent once more before the session is
// given up: the command's processes die and the session stays usable.
func TestBashKillEndingWithoutAWordIsSentAgain(t *testing.T) {
	s, _ := openMsbChannel(t)
	w := &wordlessCleanup{Session: s, isCleanup: func(c session.Command) bool { return c.Builtin == agentwire.BuiltinBashKill }}
	tb := tools.New(w, tools.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 1500*time.Millisecond)
	defer cancel()
	_, err := tb.Call(ctx, "bash", []byte(`{"command": "setsid sleep 300.71 & sleep 300.72"}`), nil)
	require.ErrorIs(t, err, session.ErrAborted)
	assert.EqualValues(t, 2, w.cleanups.Load(), "the kill was sent twice")
	assert.False(t, s.Poisoned())
	assert.Equal(t, "0\n", sh(t, s, `ps -eo args | grep -c '[s]leep 300.7' || true`), "the command's processes are gone")
}

// In a local session's resident sandbox a bash call from the toolbox's
// third on runs in the bash the agent started for it as the toolbox's
// previous bash call ended (a standby, docs/guest-agent.md), older than the
// call by the time between the two; elsewhere (msb, a sandbox per call, the
// host), and before, each call starts its own. Either way it runs as the
// first did.
func TestBashRunsInTheBashStartedAhead(t *testing.T) {
	forEachBackend(t, func(t *testing.T, s session.Session, calls func() int) {
		tb := tools.New(s, tools.Options{})
		// The age of the command's bash, in clock ticks (/proc/uptime's
		// hundredths), and its tag's length, by bash's builtins alone: a
		// program started to read the clock would add its own start to
		// the age, over a second under software emulation.
		probe := `read -r u _ </proc/uptime; read -r -a st </proc/$$/stat; echo "$(( ${u%.*}${u#*.} - ${st[21]} )) ${#OMA_BASH_OWNER}"`
		// A bash started ahead is at least this old; one of the call's own
		// is as old as its start took, which under load (or emulation)
		// can pass a second: the gap keeps the two apart.
		between := time.Second
		if onRealVM(t) {
			between = 5 * time.Second
		}
		ages := make([]int, 4)
		for i := range ages {
			if i > 0 {
				time.Sleep(between)
			}
			age, tag, ok := strings.Cut(strings.TrimSpace(mustCall(t, tb, "bash", obj{"command": probe})), " ")
			require.True(t, ok)
			assert.Equal(t, "32", tag)
			n, err := strconv.Atoi(age)
			require.NoError(t, err)
			ages[i] = n
		}
		ticks := int(between / (10 * time.Millisecond))
		assert.Less(t, ages[1], ticks*9/10, "the second call's bash is its own: the first named no next call")
		if onBackend(t, "local") && sharesSandbox(s) {
			assert.GreaterOrEqual(t, ages[2], ticks*9/10, "the third call's bash was started as the second ended")
			assert.GreaterOrEqual(t, ages[3], ticks*9/10, "and the fourth's as the third ended")
		} else {
			assert.Less(t, ages[2], ticks*9/10, "a bash of its own")
		}
	})
}

// bashIDs is a session that records the id of each bash call and the next
// id it names.
type bashIDs struct {
	session.Session
	mu    sync.Mutex
	calls [][2]string // id, next
}

func (b *bashIDs) Shell(ctx context.Context, cmd session.Command, o session.ShellOptions) (*session.Result, error) {
	if cmd.Builtin == agentwire.BuiltinBashSupervisor {
		in, err := io.ReadAll(o.Stdin)
		if err != nil {
			return nil, err
		}
		_, next, _ := strings.Cut(string(in), "\x00")
		b.mu.Lock()
		b.calls = append(b.calls, [2]string{cmd.Args[0], next})
		b.mu.Unlock()
		o.Stdin = bytes.NewReader(in)
	}
	return b.Session.Shell(ctx, cmd, o)
}

// A toolbox's bash call takes the id its predecessor named as the next,
// and names one itself only from its second call on (the one-shot CLI's
// single call leaves none waiting) and while no other bash call of the
// toolbox is in flight: at most one bash waits in the guest for a
// toolbox's call.
func TestBashNamesItsNextCall(t *testing.T) {
	s := &bashIDs{Session: sessiontest.NewHost(t)}
	tb := tools.New(s, tools.Options{})
	mustCall(t, tb, "bash", obj{"command": "true"})
	mustCall(t, tb, "bash", obj{"command": "true"})
	mustCall(t, tb, "bash", obj{"command": "true"})
	var g errgroup.Group
	g.Go(func() error { _, err := call(t, tb, "bash", obj{"command": "sleep 0.5"}); return err })
	time.Sleep(200 * time.Millisecond)
	g.Go(func() error { _, err := call(t, tb, "bash", obj{"command": "true"}); return err })
	require.NoError(t, g.Wait())
	mustCall(t, tb, "bash", obj{"command": "true"})

	first := s.calls[0]
	assert.Len(t, first[0], 32)
	assert.Empty(t, first[1], "the toolbox's first call names no next")
	s.calls = s.calls[1:]
	require.Len(t, s.calls, 5)
	for i, c := range s.calls {
		assert.Len(t, c[0], 32, "call %d's id", i)
	}
	assert.Len(t, s.calls[0][1], 32)
	assert.Equal(t, s.calls[0][1], s.calls[1][0], "the second call takes the id the first named")
	assert.Equal(t, s.calls[1][1], s.calls[2][0], "and the third the second's")
	assert.Len(t, s.calls[2][1], 32, "the third, alone when it began, names one")
	assert.Empty(t, s.calls[3][1], "the fourth, beside the third, names none")
	assert.NotEqual(t, s.calls[2][1], s.calls[3][0])
	assert.Equal(t, s.calls[2][1], s.calls[4][0], "the fifth takes the one the third named")
}

// chainLog is a BashChain of its own that records what it was left.
type chainLog struct {
	next   string
	before bool
	left   []string
}

func (c *chainLog) Take() (string, bool) { return c.next, c.before }
func (c *chainLog) Leave(next string)    { c.left = append(c.left, next) }

// A toolbox given a BashChain takes its calls' ids and whether one came
// before from it, and leaves every call's next there, keeping none itself:
// a toolbox made for a single call starts where another left off.
func TestBashTakesItsNextCallFromTheChain(t *testing.T) {
	s := &bashIDs{Session: sessiontest.NewHost(t)}
	waiting := strings.Repeat("5", 32)
	chain := &chainLog{next: waiting, before: true}
	tb := tools.New(s, tools.Options{BashChain: chain})
	mustCall(t, tb, "bash", obj{"command": "true"})
	chain.next = ""
	mustCall(t, tb, "bash", obj{"command": "true"})
	chain.before = false
	mustCall(t, tb, "bash", obj{"command": "true"})

	require.Len(t, s.calls, 3)
	assert.Equal(t, waiting, s.calls[0][0], "the first call takes the id the chain holds")
	assert.Len(t, s.calls[0][1], 32, "and names a next: a call came before")
	assert.Len(t, s.calls[1][0], 32)
	assert.NotEqual(t, s.calls[0][1], s.calls[1][0], "the toolbox keeps no id: the chain held none")
	assert.Empty(t, s.calls[2][1], "with none before by the chain, a call names none")
	assert.Equal(t, []string{s.calls[0][1], s.calls[1][1], ""}, chain.left)
}
