package local

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"golang.org/x/sync/errgroup"
	"golang.org/x/sys/unix"

	"github.com/oma-sandbox/oma-sandbox/agentchan"
	"github.com/oma-sandbox/oma-sandbox/agentwire"
	"github.com/oma-sandbox/oma-sandbox/bashproto"
	"github.com/oma-sandbox/oma-sandbox/egress"
	"github.com/oma-sandbox/oma-sandbox/internal/testutil"

	"github.com/oma-sandbox/oma-sandbox/guestagent/agenttest"
	"github.com/oma-sandbox/oma-sandbox/guestagent/bundle"
	"github.com/oma-sandbox/oma-sandbox/session"
)

// newResidentSession is a session whose calls run in its resident
// sandbox, or skips where the host cannot start one.
func newResidentSession(t *testing.T, o Options) *Session {
	t.Helper()
	o.AgentFile = agenttest.AgentBinary(t)
	s := newTestSession(t, o)
	if s.caps.Backend == "" {
		t.Skip("no working bubblewrap sandbox here")
	}
	return s
}

// agentsOf lists the guest agents serving in s's sandboxes: those in the
// pid namespace of a process binding s's workspace (other sessions', of
// other tests and other packages' tests, run meanwhile).
func agentsOf(s *Session) []string {
	self, _ := os.Readlink("/proc/self/ns/pid")
	ns := map[string]bool{}
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		if pid, err := strconv.Atoi(e.Name()); err == nil && bindsWorkspace(pid, s.dirs.Workspace) {
			if l, err := os.Readlink("/proc/" + e.Name() + "/ns/pid"); err == nil && l != self {
				ns[l] = true
			}
		}
	}
	var out []string
	// As root, the agent its starter runs again in a user namespace;
	// elsewhere, the agent bwrap started.
	serving := append(procsWith("oma-guest-agent\x00serve\x00"), procsWith(agentGuestPath+"\x00serve\x00--commands-pidns\x00")...)
	for _, p := range serving {
		pid, cmdline, _ := strings.Cut(p, ": ")
		if (strings.HasPrefix(cmdline, "oma-guest-agent serve ") || strings.HasPrefix(cmdline, agentGuestPath+" serve ")) && ns[pidNamespace(pid)] {
			out = append(out, p)
		}
	}
	return out
}

// pidNamespace names pid's pid namespace; that of its parent, the same,
// when pid is an agent that no other process may inspect.
func pidNamespace(pid string) string {
	if l, err := os.Readlink("/proc/" + pid + "/ns/pid"); err == nil {
		return l
	}
	n, _ := strconv.Atoi(pid)
	l, _ := os.Readlink("/proc/" + strconv.Itoa(parentOf(n)) + "/ns/pid")
	return l
}

// killAndAwaitDeath kills pid and waits for the host to see s's resident
// sandbox die, failing with why when it does not.
func killAndAwaitDeath(t *testing.T, s *Session, pid int, why string) {
	t.Helper()
	s.res.mu.Lock()
	conn := s.res.cur.conn
	s.res.mu.Unlock()
	require.NoError(t, syscall.Kill(pid, syscall.SIGKILL))
	select {
	case <-conn.Done():
	case <-time.After(10 * time.Second):
		t.Fatal(why)
	}
}

func rsh(t *testing.T, s *Session, script string) string {
	t.Helper()
	res, err := s.Shell(context.Background(), session.Command{Script: script}, session.ShellOptions{})
	require.NoError(t, err)
	require.Equal(t, 0, res.ExitCode, "%s: stderr %q", script, res.Stderr)
	return string(res.Stdout)
}

// Calls run in one sandbox that outlives them: a background process one
// call starts is there for the next, and files are the guest user's.
func TestResidentSandboxOutlivesCalls(t *testing.T) {
	s := newResidentSession(t, Options{WorkspaceID: "ws", SessionID: "resident"})
	assert.False(t, s.ProcessesEndWithCall())
	ns := rsh(t, s, `readlink /proc/self/ns/pid`)
	rsh(t, s, `setsid sleep 300 >/dev/null 2>&1 </dev/null & echo $! > /workspace/bg.pid`)
	assert.Equal(t, ns, rsh(t, s, `readlink /proc/self/ns/pid`), "the second call ran in the same pid namespace")
	assert.Equal(t, "alive\n", rsh(t, s, `kill -0 "$(cat /workspace/bg.pid)" && echo alive`))
	assert.Equal(t, "65534 65534\n", rsh(t, s, `echo "$(id -u) $(id -g)"`))

	write := session.Command{Builtin: "write", Args: []string{"/workspace/f.txt", "", "/workspace", "f.txt"}}
	res, err := s.Shell(context.Background(), write, session.ShellOptions{Stdin: strings.NewReader("body\n")})
	require.NoError(t, err)
	require.Equal(t, 0, res.ExitCode, "stderr %q", res.Stderr)
	fi, err := os.Stat(filepath.Join(s.dirs.Workspace, "f.txt"))
	require.NoError(t, err)
	assert.EqualValues(t, guestUID, fi.Sys().(*syscall.Stat_t).Uid, "the builtin wrote as the guest user")

	n := s.Served()
	assert.Equal(t, 6, n.Resident)
	assert.Equal(t, map[string]int{"write": 1}, n.Builtins)
}

// The agent serving the calls is out of their reach: another host uid
// (root of a user namespace that maps no host account), so a command can
// neither signal, trace nor read it; and the command runs under the
// seccomp filter and without capabilities.
func TestResidentAgentOutOfReach(t *testing.T) {
	for name, pol := range map[string]Policy{
		"workspace-write": {},
		// The host's file system is the sandbox's; the session's
		// directory, closed to the guest user, still keeps the socket.
		"danger-full-access": {Mode: ModeDangerFullAccess, AllowDangerous: true},
	} {
		t.Run(name, func(t *testing.T) { residentAgentOutOfReach(t, pol) })
	}
}

func residentAgentOutOfReach(t *testing.T, pol Policy) {
	s := newResidentSession(t, Options{WorkspaceID: "ws", SessionID: "reach", Policy: pol})
	if os.Geteuid() != 0 {
		residentAgentOutOfReachUnprivileged(t, s, pol)
		return
	}
	out := rsh(t, s, `for p in /proc/[0-9]*; do
  case "$(tr '\0' ' ' < $p/cmdline 2>/dev/null)" in "/.oma-sandbox/agent serve "*|"oma-guest-agent serve "*) echo "${p#/proc/}";; esac
done`)
	// The agent, and the process that started it in its user namespace
	// and waits for it; and bwrap, the sandbox's init.
	pids := append(strings.Fields(out), "1")
	require.Len(t, pids, 3, "the sandbox's processes: %q", out)
	for _, pid := range pids {
		probe := `p=` + pid + `
kill -0 $p 2>/dev/null && echo signalled
kill -STOP $p 2>/dev/null && echo stopped
cat /proc/$p/environ >/dev/null 2>&1 && echo environ
ls /proc/$p/fd >/dev/null 2>&1 && echo fds
cat /proc/$p/mem >/dev/null 2>&1 && echo mem
grep -E '^(Seccomp|CapEff|NoNewPrivs):' /proc/self/status
echo done`
		assert.Equal(t, "Seccomp:\t2\nNoNewPrivs:\t1\nCapEff:\t0000000000000000\ndone\n", sortStatus(rsh(t, s, probe)), "agent pid %s", pid)
	}
	// The host sees the serving agent as residentHostUID.
	agents := agentsOf(s)
	require.Len(t, agents, 1)
	pid, _, _ := strings.Cut(agents[0], ":")
	status, err := os.ReadFile("/proc/" + pid + "/status")
	require.NoError(t, err)
	assert.Contains(t, string(status), "\nUid:\t"+strconv.Itoa(residentHostUID)+"\t")
	assert.Equal(t, "ok\n", rsh(t, s, `echo ok`), "the agent still serves")
	// Nor can a command reach the agent's socket: the session's directory
	// is not in the sandbox, or (danger-full-access) not open to it.
	require.FileExists(t, filepath.Join(s.dirs.Root, residentSocket))
	assert.Equal(t, "hidden\n", rsh(t, s, `[ -e '`+filepath.Join(s.dirs.Root, residentSocket)+`' ] && echo visible || echo hidden`))
}

// Where oma-sandbox is not root, the agent is the commands' uid, but no
// command can name it: the commands' pid namespace holds only them and
// its init, which shrugs off every signal and cannot be read or traced.
// The agent holds no capability.
func residentAgentOutOfReachUnprivileged(t *testing.T, s *Session, pol Policy) {
	out := rsh(t, s, `for p in /proc/[0-9]*; do
  [ "$p" = /proc/$$ ] || [ "$p" = /proc/self ] || echo "${p#/proc/} $(tr '\0' ' ' < $p/cmdline 2>/dev/null)"
done`)
	assert.Equal(t, "1 oma-guest-agent commands-init \n", out, "the processes a command can name, but its own")
	agents := agentsOf(s)
	require.Len(t, agents, 1)
	pid, _, _ := strings.Cut(agents[0], ":")
	probe := `for sig in STOP TERM INT HUP USR1 SEGV KILL; do kill -$sig 1; done
sleep 0.1
grep '^State:' /proc/1/status
cat /proc/1/environ >/dev/null 2>&1 && echo environ
ls /proc/1/fd >/dev/null 2>&1 && echo fds
cat /proc/1/mem >/dev/null 2>&1 && echo mem
readlink /proc/1/exe >/dev/null 2>&1 && echo exe
prlimit --pid 1 --cpu=1:1 2>/dev/null && echo "limited pid 1"
kill -0 ` + pid + ` 2>/dev/null && [ "$(tr '\0' ' ' < /proc/` + pid + `/cmdline)" = "` + strings.TrimSpace(strings.SplitN(agents[0], ": ", 2)[1]) + `" ] && echo "named the agent"
grep -E '^(Seccomp|CapEff|NoNewPrivs):' /proc/self/status
echo done`
	assert.Equal(t, "State:\tS (sleeping)\nSeccomp:\t2\nNoNewPrivs:\t1\nCapEff:\t0000000000000000\ndone\n", sortStatus(rsh(t, s, probe)))
	// Nor can a builtin, which the agent runs itself, be pointed at the
	// agent's own entries: it is undumpable, so they are root's.
	for _, p := range []string{"/proc/self/environ", "/proc/self/fd/0", "/proc/self/mem"} {
		read := session.Command{Builtin: "read", Args: []string{p, "1", "10", "10000", "x", "END"}}
		res, err := s.Shell(context.Background(), read, session.ShellOptions{})
		require.NoError(t, err)
		assert.Equal(t, "Permission denied: x\n", string(res.Stderr), p)
		assert.Empty(t, res.Stdout, p)
	}
	assert.Equal(t, "CapPrm:\t0000000000000000\nCapEff:\t0000000000000000\nNoNewPrivs:\t1\nSeccomp:\t2\n",
		rsh(t, s, `grep -E '^(Seccomp|CapEff|CapPrm|NoNewPrivs):' /proc/1/status`), "pid 1 holds nothing and is under the filter")
	status, err := os.ReadFile("/proc/" + pid + "/status")
	require.NoError(t, err)
	for _, want := range []string{"\nUid:\t" + strconv.Itoa(os.Geteuid()) + "\t", "\nCapEff:\t0000000000000000\n", "\nCapPrm:\t0000000000000000\n", "\nCapAmb:\t0000000000000000\n", "\nNoNewPrivs:\t1\n", "\nSeccomp:\t2\n"} {
		assert.Contains(t, string(status), want, "the agent's status")
	}
	assert.Equal(t, "ok\n", rsh(t, s, `echo ok`), "the agent still serves")
	// Under danger-full-access the guest is the host user with the host's
	// files, the session's socket among them: it gives nothing more.
	if pol.Mode != ModeDangerFullAccess {
		require.FileExists(t, filepath.Join(s.dirs.Root, residentSocket))
		assert.Equal(t, "hidden\n", rsh(t, s, `[ -e '`+filepath.Join(s.dirs.Root, residentSocket)+`' ] && echo visible || echo hidden`))
	}
}

// sortStatus puts the /proc status lines the probe printed in a fixed
// order, whatever order the kernel lists them in.
func sortStatus(out string) string {
	var lines, status []string
	for l := range strings.Lines(out) {
		if strings.HasPrefix(l, "Seccomp:") || strings.HasPrefix(l, "NoNewPrivs:") || strings.HasPrefix(l, "CapEff:") {
			status = append(status, l)
		} else {
			lines = append(lines, l)
		}
	}
	order := map[string]int{"Seccomp:": 0, "NoNewPrivs:": 1, "CapEff:": 2}
	sorted := make([]string, 3)
	for _, l := range status {
		k, _, _ := strings.Cut(l, "\t")
		sorted[order[k]] = l
	}
	return strings.Join(append(lines[:len(lines)-1], append(sorted, lines[len(lines)-1])...), "")
}

// Poison, Pause and Close end the resident sandbox with everything in it;
// the next call starts a new one.
func TestResidentSandboxEnds(t *testing.T) {
	s := newResidentSession(t, Options{WorkspaceID: "ws", SessionID: "ends"})
	ctx := context.Background()
	// A file in the sandbox's own /tmp tells one sandbox from the next (a
	// namespace's inode number may be reused at once).
	rsh(t, s, `: > /tmp/old-sandbox`)
	startBackground(t, s, "oma-bg-poison")
	require.NotEmpty(t, procsWith("oma-bg-poison"))
	require.NoError(t, s.Poison(ctx, session.ErrGuestTimeout))
	assert.Empty(t, procsWith("oma-bg-poison"), "poison left the background process running")
	assert.Equal(t, "new\n", rsh(t, s, `[ -e /tmp/old-sandbox ] && echo old || echo new`), "the next call runs in a new sandbox")
	startBackground(t, s, "oma-bg-close")
	require.NoError(t, s.Close(ctx))
	assert.Empty(t, procsWith("oma-bg-close"))
}

// TestResidentSandboxDeaths: when the agent of a resident sandbox dies
// (killed from the host), the next call starts another sandbox, until the
// last death residentMaxDeaths allows: from then on each call gets a
// sandbox of its own. The metrics count each event and where calls ran.
func TestResidentSandboxDeaths(t *testing.T) {
	s := newResidentSession(t, Options{WorkspaceID: "ws", SessionID: "deaths"})
	reader := sdkmetric.NewManualReader()
	s.Measure(sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader)))
	for range residentMaxDeaths {
		require.Equal(t, "hi\n", rsh(t, s, "echo hi"))
		agents := agentsOf(s)
		require.Len(t, agents, 1)
		pid, _, _ := strings.Cut(agents[0], ":")
		n, err := strconv.Atoi(pid)
		require.NoError(t, err)
		killAndAwaitDeath(t, s, n, "the host did not see the agent die")
	}
	require.Equal(t, "after\n", rsh(t, s, "echo after"))
	assert.Empty(t, agentsOf(s), "no resident sandbox after the last death")
	assert.Equal(t, map[string]int64{"opened": 3, "died": 3, "fell_back": 1},
		testutil.SumsBy(t, reader, agentchan.ChannelEventsMetric, "oma.event"))
	assert.Equal(t, map[string]int64{"channel": 3, "own": 1},
		testutil.SumsBy(t, reader, agentchan.CallsMetric, "oma.route"))
	assert.Equal(t, 3, s.Served().Resident)
}

// Where the agent is not root, its sandbox ends with the init of its
// commands' pid namespace: without it no command could start again. The
// host sees a death, and the next call gets a new sandbox.
func TestResidentSandboxDiesWithItsCommandsInit(t *testing.T) {
	if os.Geteuid() == 0 {
		t.Skip("as root the agent is another uid and its commands have no init of their own (TestUnprivilegedHost runs this)")
	}
	s := newResidentSession(t, Options{WorkspaceID: "ws", SessionID: "init"})
	startBackground(t, s, "oma-bg-init")
	agents := agentsOf(s)
	require.Len(t, agents, 1)
	agent, _, _ := strings.Cut(agents[0], ":")
	var helper int
	for _, p := range procsWith("oma-guest-agent\x00commands-init\x00") {
		pid, _ := strconv.Atoi(p[:strings.IndexByte(p, ':')])
		if strconv.Itoa(parentOf(pid)) == agent {
			helper = pid
		}
	}
	require.NotZero(t, helper, "the agent's commands-init")
	killAndAwaitDeath(t, s, helper, "the agent served on without its commands' init")
	assert.Contains(t, logTail(s.dirs.Root), "the commands' pid namespace ended")
	noProcs(t, "oma-bg-init")
	assert.Equal(t, "after\n", rsh(t, s, "echo after"), "a new sandbox serves")
}

// startBackground starts `sleep` named marker in the background of a
// call, and returns once it has left the call's process group.
func startBackground(t *testing.T, s *Session, marker string) {
	t.Helper()
	rsh(t, s, `rm -f /tmp/started; setsid bash -c ': > /tmp/started; exec -a `+marker+` sleep 300' >/dev/null 2>&1 </dev/null &
while [ ! -e /tmp/started ]; do sleep 0.01; done`)
}

// lowerRevisionSession is a session whose resident sandbox a process of
// its own started with the previous revision's agent and left: with a
// background process named marker, or none ("-"), and then exiting or,
// with "hang", keeping its connection open.
func lowerRevisionSession(t *testing.T, id, marker, then string) (*Session, *exec.Cmd) {
	t.Helper()
	s := newTestSession(t, Options{WorkspaceID: "ws", SessionID: id, AgentFile: agenttest.PreviousRevisionAgentBinary(t)})
	if s.caps.Backend == "" {
		t.Skip("no working bubblewrap sandbox here")
	}
	helper := runHelper(t, s, marker, then)
	if then != "hang" {
		require.NoError(t, helper.Wait())
	} else {
		t.Cleanup(func() {
			_ = helper.Process.Kill()
			_ = helper.Wait()
		})
	}
	return s, helper
}

// attachWithThisAgent attaches to s as another process of this program
// would, and makes a call (a write, which the previous revision's agent
// has too).
func attachWithThisAgent(t *testing.T, s *Session) *Session {
	t.Helper()
	a, err := Attach(context.Background(), filepath.Dir(s.dirs.Root), s.Name())
	require.NoError(t, err)
	a.agent = &agent{file: agenttest.AgentBinary(t)}
	write := session.Command{Builtin: "write", Args: []string{"/workspace/f.txt", "", "/workspace", "f.txt"}}
	res, err := a.Shell(context.Background(), write, session.ShellOptions{Stdin: strings.NewReader("body\n")})
	require.NoError(t, err)
	require.Equal(t, 0, res.ExitCode, "stderr %q", res.Stderr)
	assert.Equal(t, 1, a.Served().Resident, "the call ran in the resident sandbox")
	return a
}

var olderByRevision = fmt.Sprintf("its revision is %d, this program's %d", agentwire.Revision-1, agentwire.Revision)

// A resident sandbox whose agent is of a lower revision (an older program
// started it) serves on for a session this program attaches while it is
// busy, as restarting it would end its background processes or the calls
// another process has in flight (docs/guest-agent.md): here a background
// process its starter left, then another process's open connection. Once
// the sandbox is idle, a call of the attached session replaces it.
func TestAResidentAgentOfALowerRevisionServesOnWhileBusy(t *testing.T) {
	for _, busy := range []struct{ name, marker, then string }{
		{"background", "oma-bg-lower", "exit"},
		{"connection", "-", "hang"},
	} {
		t.Run(busy.name, func(t *testing.T) {
			s, helper := lowerRevisionSession(t, "lower-"+busy.name, busy.marker, busy.then)
			before := readResident(s.dirs.Root)
			a := attachWithThisAgent(t, s)
			assert.Equal(t, olderByRevision, a.res.cur.conn.Older())
			assert.Equal(t, before, readResident(s.dirs.Root), "the same sandbox")
			if busy.then == "hang" {
				require.NoError(t, helper.Process.Signal(syscall.Signal(0)), "the helper's connection ended")
			} else {
				assert.NotEmpty(t, procsWith(busy.marker))
			}

			reader := sdkmetric.NewManualReader()
			a.Measure(sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader)))

			// Asked again while still busy, it serves on.
			time.Sleep(olderRecheck)
			rsh(t, a, `true`)
			assert.Equal(t, olderByRevision, a.res.cur.conn.Older())
			assert.Equal(t, before, readResident(s.dirs.Root), "the same sandbox")

			requireSocketDiagnostics(t)
			if busy.then == "hang" {
				require.NoError(t, helper.Process.Kill())
				_ = helper.Wait()
			} else {
				killWith(t, busy.marker)
			}
			require.Eventually(t, func() bool {
				return residentIdle(s.dirs.Root, before)
			}, 10*time.Second, 10*time.Millisecond, "the sandbox never became idle")
			time.Sleep(olderRecheck)
			// Calls at once: one replaces the sandbox, the others wait for
			// it and run on the new one.
			var calls errgroup.Group
			for range 8 {
				calls.Go(func() error {
					res, err := a.Shell(context.Background(), session.Command{Script: `cat /workspace/f.txt`}, session.ShellOptions{})
					if err == nil && string(res.Stdout) != "body\n" {
						err = fmt.Errorf("the workspace changed: %q, stderr %q", res.Stdout, res.Stderr)
					}
					return err
				})
			}
			require.NoError(t, calls.Wait())
			assert.Empty(t, a.res.cur.conn.Older(), "the sandbox still runs the older agent")
			assert.NotEqual(t, before, readResident(s.dirs.Root), "the same sandbox")
			assert.True(t, before.Init.exitsWithin(0), "the older sandbox still runs")
			assert.Len(t, agentsOf(s), 1)
			assert.Equal(t, map[string]int64{"replaced": 1, "opened": 1},
				testutil.SumsBy(t, reader, agentchan.ChannelEventsMetric, "oma.event"))
		})
	}
}

// killWith kills the processes whose command line holds marker.
func killWith(t *testing.T, marker string) {
	t.Helper()
	procs := procsWith(marker)
	require.NotEmpty(t, procs, "no process %q", marker)
	for _, p := range procs {
		pid, err := strconv.Atoi(p[:strings.IndexByte(p, ':')])
		require.NoError(t, err)
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
}

// requireSocketDiagnostics skips t where the kernel answers no unix socket
// diagnostics (CONFIG_UNIX_DIAG): there no resident sandbox is taken for
// idle, so an older agent serves on.
func requireSocketDiagnostics(t *testing.T) {
	t.Helper()
	if _, _, err := socketUsers(unix.Stat_t{}); err != nil {
		t.Skipf("no unix socket diagnostics here (%v): no resident sandbox is taken for idle", err)
	}
}

// Once idle (no background process, no other connection), a resident
// sandbox whose agent is of a lower revision is replaced by one running
// this program's agent, with the workspace as it was.
func TestAnIdleResidentAgentOfALowerRevisionIsReplaced(t *testing.T) {
	requireSocketDiagnostics(t)
	s, _ := lowerRevisionSession(t, "lower-idle", "-", "exit")
	before := readResident(s.dirs.Root)
	require.NotZero(t, before.Init.PID)
	// Wait until what the helper made has ended (on a loaded machine the
	// agent closes its end of a finished connection a while after the
	// helper exited; an attach in between finds the sandbox busy, and its
	// older agent serves on) but for the bash the older agent started for
	// the helper's next call, which it ends when asked (standby-end).
	var st unix.Stat_t
	require.NoError(t, unix.Lstat(filepath.Join(s.dirs.Root, residentSocket), &st))
	require.Eventually(t, func() bool {
		listening, connected, err := socketUsers(st)
		return err == nil && listening == 1 && connected == 0 && commandsRunIn(before.Init.PID, os.Geteuid() == 0)
	}, 10*time.Second, 10*time.Millisecond, "the starter's connection never ended, or no bash waits for its next call")
	a := attachWithThisAgent(t, s)
	assert.Empty(t, a.res.cur.conn.Older(), "the sandbox still runs the older agent")
	assert.NotEqual(t, before, readResident(s.dirs.Root), "the same sandbox")
	assert.True(t, before.Init.exitsWithin(0), "the older sandbox still runs")
	assert.Len(t, agentsOf(s), 1)
	assert.Equal(t, "body\n", rsh(t, a, `cat /workspace/helper-was-here /workspace/f.txt`), "the workspace changed")
}

// residentIdle tells an idle resident sandbox from one with another
// connection open or a background process running.
func TestResidentIdle(t *testing.T) {
	requireSocketDiagnostics(t)
	s := newResidentSession(t, Options{WorkspaceID: "ws", SessionID: "idle"})
	rsh(t, s, `true`)
	if s.Served().Resident == 0 {
		t.Skip("no resident sandbox on this host")
	}
	root := s.dirs.Root
	procs := readResident(root)
	idleSoon := func(want bool) {
		t.Helper()
		require.Eventually(t, func() bool { return residentIdle(root, procs) == want }, 10*time.Second, 20*time.Millisecond, "idle should be %v", want)
	}
	idleSoon(true)
	nc, err := dialResident(context.Background(), root)
	require.NoError(t, err)
	// Once the agent has said hello, it has accepted the connection.
	conn, err := agentchan.Open(context.Background(), nc, nc)
	require.NoError(t, err)
	assert.False(t, residentIdle(root, procs), "another connection is open")
	conn.Close()
	nc.Close()
	idleSoon(true)
	rsh(t, s, `setsid sleep 300 >/dev/null 2>&1 </dev/null & echo $! > /workspace/bg.pid`)
	assert.False(t, residentIdle(root, procs), "a background process runs")
	rsh(t, s, `kill -9 $(cat /workspace/bg.pid)`)
	idleSoon(true)
	assert.False(t, residentIdle(root, residentProcs{}), "no sandbox is idle")
}

// A session made with SandboxPerCall runs each call in a sandbox of its
// own, whose processes end with it, and so does every process attached to
// it.
func TestSandboxPerCall(t *testing.T) {
	s := newResidentSession(t, Options{WorkspaceID: "ws", SessionID: "percall", SandboxPerCall: true})
	assert.True(t, s.ProcessesEndWithCall())
	rsh(t, s, `: > /tmp/old-sandbox`)
	assert.Equal(t, "new\n", rsh(t, s, `[ -e /tmp/old-sandbox ] && echo old || echo new`), "a call ran in another call's sandbox")
	assert.Zero(t, s.Served().Resident)

	a, err := Attach(context.Background(), filepath.Dir(s.dirs.Root), s.Name())
	require.NoError(t, err)
	a.agent = s.agent
	assert.True(t, a.ProcessesEndWithCall())
	rsh(t, a, `true`)
	assert.Zero(t, a.Served().Resident)
}

// A command killed by a signal the host did not send reports 255 where the
// guest agent ran it (the resident sandbox), as msb does, and 128+N in a
// sandbox of its own, as a shell would (session.Result).
func TestASignalDeathsExitCode(t *testing.T) {
	for _, tt := range []struct {
		perCall bool
		want    int
	}{{false, 255}, {true, 128 + int(syscall.SIGKILL)}} {
		s := newResidentSession(t, Options{WorkspaceID: "ws", SessionID: fmt.Sprintf("signal-%v", tt.perCall), SandboxPerCall: tt.perCall})
		res, err := s.Shell(context.Background(), session.Command{Script: `kill -9 $$`}, session.ShellOptions{})
		require.NoError(t, err, "a signal death is a result")
		assert.Equal(t, tt.want, res.ExitCode, "per call: %v", tt.perCall)
		assert.Equal(t, !tt.perCall, s.Served().Resident == 1)
	}
}

// A session attached to in another Session (as in another process) joins
// the resident sandbox its creator started, rather than starting one: a
// background process either started is there for both, and ending the
// session from the attached one ends the sandbox for both.
func TestAttachedSessionsShareTheResidentSandbox(t *testing.T) {
	s := newResidentSession(t, Options{WorkspaceID: "ws", SessionID: "shared"})
	ns := rsh(t, s, `readlink /proc/self/ns/pid; : > /tmp/old-sandbox`)
	startBackground(t, s, "oma-bg-shared")

	a, err := Attach(context.Background(), filepath.Dir(s.dirs.Root), s.Name())
	require.NoError(t, err)
	a.agent = s.agent
	assert.False(t, a.ProcessesEndWithCall())
	assert.Equal(t, ns, rsh(t, a, `readlink /proc/self/ns/pid`), "the attached session started a sandbox of its own")
	assert.Contains(t, rsh(t, a, `ps -eo args`), "oma-bg-shared")
	assert.Equal(t, 2, a.Served().Resident)
	assert.Len(t, agentsOf(s), 1, "one agent serves both")

	require.NoError(t, a.Poison(context.Background(), session.ErrGuestTimeout))
	assert.Empty(t, procsWith("oma-bg-shared"), "poisoning from the attached session left the sandbox running")
	assert.Equal(t, "new\n", rsh(t, s, `[ -e /tmp/old-sandbox ] && echo old || echo new`), "the creator's next call starts a new sandbox")
	s.res.mu.Lock()
	defer s.res.mu.Unlock()
	assert.Zero(t, s.res.deaths, "a sandbox ended on purpose counted as one that died")
}

// residentHelperArg makes the test binary attach to a session, start a
// background process in its resident sandbox (with the marker "-", only
// write a file), say so, and then exit or, with "hang", wait to be
// killed: a process that started the session's sandbox and is gone.
const residentHelperArg = "oma-sandbox-resident-helper"

func residentHelper(args []string) int {
	if len(args) != 5 {
		return 2
	}
	state, name, agentFile, marker, then := args[0], args[1], args[2], args[3], args[4]
	s, err := Attach(context.Background(), state, name)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	s.agent = &agent{file: agentFile}
	// Returns once the background process runs (it names marker from its
	// start: in its arguments, then as its name).
	script := `setsid bash -c ': > /tmp/started-$1; exec -a "$1" sleep 300' bash "$1" >/dev/null 2>&1 </dev/null &
while [ ! -e "/tmp/started-$1" ]; do sleep 0.01; done`
	cmd, opts := session.Command{Script: script, Args: []string{marker}}, session.ShellOptions{}
	if marker == "-" {
		// A bash call that names the next: the agent starts that call's
		// bash as this one ends, a process of the guest's that waits.
		call := bashproto.NewCall()
		call.Next = bashproto.NewCall().ID
		args, stdin := bashproto.Args(call, `: > /workspace/helper-was-here`, time.Minute, bashproto.LogsIn("/workspace"), bashproto.Limits{MaxLines: 10, MaxBytes: 1000})
		cmd, opts = session.Command{Builtin: agentwire.BuiltinBashSupervisor, Args: args}, session.ShellOptions{Stdin: bytes.NewReader(stdin)}
	}
	res, err := s.Shell(context.Background(), cmd, opts)
	if err != nil || res.ExitCode != 0 || s.Served().Resident != 1 {
		fmt.Fprintln(os.Stderr, "the call did not run in a resident sandbox:", err)
		return 1
	}
	fmt.Println("started")
	if then == "hang" {
		select {}
	}
	return 0
}

// runHelper runs residentHelper in a process of its own and returns once
// it said it started; the process is still running with "hang".
func runHelper(t *testing.T, s *Session, marker, then string) *exec.Cmd {
	t.Helper()
	cmd := exec.Command(os.Args[0], residentHelperArg, filepath.Dir(s.dirs.Root), s.Name(), s.agent.file, marker, then)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	line, _ := bufio.NewReader(out).ReadString('\n')
	require.Equal(t, "started\n", line, "helper: %s", stderr.String())
	return cmd
}

// The resident sandbox outlives the process that started it, as a VM
// outlives the command that created it: a background process is there for
// the next process's calls, and the session's Close, from any process,
// ends it with everything in it.
func TestResidentSandboxOutlivesItsStarter(t *testing.T) {
	s := newResidentSession(t, Options{WorkspaceID: "ws", SessionID: "outlives"})
	require.NoError(t, runHelper(t, s, "oma-bg-outlives", "exit").Wait())
	require.NotEmpty(t, procsWith("oma-bg-outlives"), "the sandbox ended with the process that started it")
	assert.Contains(t, rsh(t, s, `ps -eo args`), "oma-bg-outlives", "the next call ran in another sandbox")
	assert.Equal(t, 1, s.Served().Resident)

	// A process that never called ends it too.
	a, err := Attach(context.Background(), filepath.Dir(s.dirs.Root), s.Name())
	require.NoError(t, err)
	require.NoError(t, a.Poison(context.Background(), session.ErrGuestTimeout))
	assert.Empty(t, procsWith("oma-bg-outlives"), "Poison from another process left the sandbox running")

	require.NoError(t, runHelper(t, s, "oma-bg-outlives-2", "exit").Wait())
	require.NoError(t, a.Close(context.Background()))
	assert.Empty(t, procsWith("oma-bg-outlives-2"), "Close from another process left the sandbox running")
}

// A process killed while its session's sandbox runs leaves nothing the
// reaper does not end.
func TestReapEndsAResidentSandboxWhoseStarterWasKilled(t *testing.T) {
	state := t.TempDir()
	s := newResidentSession(t, Options{StateDir: state, WorkspaceID: "ws", SessionID: "killed"})
	helper := runHelper(t, s, "oma-bg-killed", "hang")
	require.NoError(t, helper.Process.Kill())
	_ = helper.Wait()
	require.NotEmpty(t, procsWith("oma-bg-killed"))
	requireReaped(t, state, s, "oma-bg-killed")
}

// A call's own timeout and output cap hold in the resident sandbox, and
// end only that call.
func TestResidentCallLimits(t *testing.T) {
	s := newResidentSession(t, Options{WorkspaceID: "ws", SessionID: "limits"})
	ctx := context.Background()
	begin := time.Now()
	_, err := s.Shell(ctx, session.Command{Script: `sleep 30`}, session.ShellOptions{GuestTimeout: 300 * time.Millisecond})
	require.ErrorIs(t, err, session.ErrGuestTimeout)
	assert.Less(t, time.Since(begin), 10*time.Second)
	_, err = s.Shell(ctx, session.Command{Script: `head -c 100000 /dev/zero`}, session.ShellOptions{MaxOutput: 1000})
	require.ErrorIs(t, err, session.ErrOutputOverflow)
	cctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancel()
	_, err = s.Shell(cctx, session.Command{Script: `sleep 30`}, session.ShellOptions{})
	require.ErrorIs(t, err, session.ErrHostTimeout)
	assert.Equal(t, "ok\n", rsh(t, s, `echo ok`))
	assert.Equal(t, 4, s.Served().Resident)
}

// gatedStart holds every resident sandbox's start until gate closes.
type gatedStart struct {
	platform
	residentStarter
	gate chan struct{}
}

func (p gatedStart) startResident(c call, ln, stderr *os.File) (residentProcs, error) {
	<-p.gate
	return p.residentStarter.startResident(c, ln, stderr)
}

// TestResidentStartWaitersKeepTheirDeadlines: while one call starts the
// resident sandbox, another call waits for it only as long as its own
// context allows; Pause waits for the start and ends the sandbox it
// started; and the session serves on.
func TestResidentStartWaitersKeepTheirDeadlines(t *testing.T) {
	s := newResidentSession(t, Options{WorkspaceID: "ws", SessionID: "waiters"})
	gate := make(chan struct{})
	open := sync.OnceFunc(func() { close(gate) })
	t.Cleanup(open)
	s.plat = gatedStart{platform: s.plat, residentStarter: s.plat.(residentStarter), gate: gate}

	// The first call may see its sandbox ended by the Poison below, as
	// any call that runs during a Poison may.
	first := make(chan error, 1)
	go func() {
		_, err := s.Shell(context.Background(), session.Command{Script: "echo first"}, session.ShellOptions{})
		first <- err
	}()
	require.Eventually(t, func() bool {
		s.res.mu.Lock()
		defer s.res.mu.Unlock()
		return s.res.starting != nil
	}, 10*time.Second, 5*time.Millisecond, "the first call starts the sandbox")

	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	second := make(chan error, 1)
	go func() {
		_, err := s.Shell(ctx, session.Command{Script: "echo second"}, session.ShellOptions{})
		second <- err
	}()
	select {
	case err := <-second:
		require.ErrorIs(t, err, session.ErrHostTimeout)
	case <-time.After(5 * time.Second):
		t.Fatal("the waiting call outlived its deadline by 5 s")
	}

	poisoned := make(chan error, 1)
	go func() { poisoned <- s.Poison(context.Background(), session.ErrGuestTimeout) }()
	select {
	case err := <-poisoned:
		t.Fatalf("Poison returned (%v) while a start was under way", err)
	case <-time.After(100 * time.Millisecond):
	}
	open()
	require.NoError(t, <-poisoned)
	select {
	case <-first:
	case <-time.After(30 * time.Second):
		t.Fatal("the first call did not return after the Poison")
	}
	assert.Empty(t, agentsOf(s), "Poison ended the sandbox the start made")
	assert.Equal(t, "again\n", rsh(t, s, "echo again"))
}

// A build without the bundled agent (plain `go build`, `go install`) still
// runs every call's builtin: the program serves as its own agent, from an
// execute-only copy that a command can run but not read, in the resident
// sandbox and in a sandbox per call alike.
func TestAProgramWithoutTheBundledAgentServesAsItsOwn(t *testing.T) {
	if os.Geteuid() != 0 {
		// Then the agent drops its capabilities on every thread
		// (guestagent's dropCapabilities), which a program built with cgo,
		// as this test is, cannot: its calls run a sandbox each.
		t.Skip("a program built with cgo serves as its own resident agent only as root")
	}
	bundled = func(string) ([]byte, bool) { return nil, false }
	t.Cleanup(func() { bundled = bundle.Binary })
	write := session.Command{Script: "exit 99", Builtin: "write", Args: []string{"/workspace/f.txt", "", "/workspace", "f.txt"}}
	for _, perCall := range []bool{false, true} {
		s := newTestSession(t, Options{WorkspaceID: "ws", SessionID: "self", SandboxPerCall: perCall})
		if s.caps.Backend == "" {
			t.Skip("no working bubblewrap sandbox here")
		}
		res, err := s.Shell(context.Background(), write, session.ShellOptions{Stdin: strings.NewReader("body\n")})
		require.NoError(t, err)
		require.Equal(t, 0, res.ExitCode, "stderr %q", res.Stderr)
		assert.Equal(t, "body\n", rsh(t, s, `cat /workspace/f.txt`))
		assert.Equal(t, "unreadable\n", rsh(t, s, `cat /.oma-sandbox/agent >/dev/null 2>&1 && echo readable || echo unreadable`))
		n := s.Served()
		assert.Equal(t, map[string]int{"write": 1}, n.Builtins, "per call: %v", perCall)
		if perCall {
			assert.Zero(t, n.Resident)
		} else {
			assert.Equal(t, 3, n.Resident)
		}
		path, err := s.agent.hostPath()
		require.NoError(t, err)
		assert.Contains(t, filepath.Base(path), "oma-sandbox-self-")
		if perCall {
			// Pruned by another program: the next call places it again.
			require.NoError(t, os.Remove(path))
			assert.Equal(t, "body\n", rsh(t, s, `cat /workspace/f.txt`))
			res, err := s.Shell(context.Background(), write, session.ShellOptions{Stdin: strings.NewReader("again\n")})
			require.NoError(t, err)
			require.Equal(t, 0, res.ExitCode, "stderr %q", res.Stderr)
			assert.FileExists(t, path)
		}
	}
}

// TestEndRecordedSparesAProcessItDoesNotName plants a record naming a live
// process of the host's by its pid, as a recycled pid would: ending the
// recorded sandbox removes the record and spares the process; a record
// that names it by its start time too ends it.
func TestEndRecordedSparesAProcessItDoesNotName(t *testing.T) {
	sleep := exec.Command("sleep", "60")
	require.NoError(t, sleep.Start())
	exited := make(chan struct{})
	go func() {
		sleep.Wait()
		close(exited)
	}()
	t.Cleanup(func() {
		sleep.Process.Kill()
		<-exited
	})
	pid := sleep.Process.Pid
	start := startTime(pid)
	require.NotZero(t, start)

	root := t.TempDir()
	recycled := proc{PID: pid, Start: start + 1}
	require.NoError(t, writeResident(root, residentProcs{Init: recycled, Bwrap: recycled}))
	require.NoError(t, endRecorded(root))
	assert.NoFileExists(t, filepath.Join(root, residentRecord))
	select {
	case <-exited:
		t.Fatal("a process the record named only by a recycled pid was ended")
	case <-time.After(200 * time.Millisecond):
	}

	require.NoError(t, writeResident(root, residentProcs{Init: proc{PID: pid, Start: start}}))
	require.NoError(t, endRecorded(root))
	select {
	case <-exited:
	case <-time.After(5 * time.Second):
		t.Fatal("the recorded process still runs")
	}
}

// A session's memory and CPU limits bound its resident sandbox, whose
// groups are its own: a session attached to (as another process) runs in
// them too and is told when a limit fired during its call, and the groups
// end with the sandbox, each sandbox having its own.
func TestResidentSandboxHoldsTheSessionsLimits(t *testing.T) {
	s := newResidentSession(t, Options{Limits: Limits{MemoryBytes: 64 << 20, CPUQuota: 50 * time.Millisecond}})
	rsh(t, s, `true`)
	first := readResident(s.dirs.Root).Cgroup
	require.Regexp(t, `^resident-[0-9a-f]{12}$`, first)
	groups := func(leaf string) (dirs []string) {
		parents, err := recordedCgroups(s.dirs.Root)
		require.NoError(t, err)
		for _, p := range parents {
			if exists(filepath.Join(p, leaf)) {
				dirs = append(dirs, filepath.Join(p, leaf))
			}
		}
		return dirs
	}
	require.Len(t, groups(first), 3, "memory, cpu and freezer groups (v1) or one unified group") // this host's hierarchies are v1
	// Stats show the sandbox's uptime and its group's memory use.
	st, err := s.Stats(context.Background())
	require.NoError(t, err)
	require.NotNil(t, st.Uptime)
	assert.Less(t, *st.Uptime, time.Minute)
	require.NotNil(t, st.MemoryBytes)
	require.NotNil(t, st.MemoryLimitBytes)
	assert.Equal(t, int64(64<<20), *st.MemoryLimitBytes)
	assert.Positive(t, *st.MemoryBytes, "the agent alone uses some")
	assert.LessOrEqual(t, *st.MemoryBytes, *st.MemoryLimitBytes)
	rsh(t, s, `head -c 20M /dev/zero > /tmp/held; sleep 0.5`) // tmpfs pages count against the group
	if st2, err := s.Stats(context.Background()); assert.NoError(t, err) && assert.NotNil(t, st2.MemoryBytes) {
		assert.Greater(t, *st2.MemoryBytes, *st.MemoryBytes+15<<20, "20 MiB in the sandbox's /tmp")
		// The uptime grew as the wall clock did, to its 10 ms ticks.
		assert.InDelta(t, st2.Sampled.Sub(st.Sampled).Seconds(), (*st2.Uptime - *st.Uptime).Seconds(), 0.05)
	}
	a, err := Attach(context.Background(), filepath.Dir(s.dirs.Root), s.Name())
	require.NoError(t, err)
	a.agent = s.agent
	res, err := a.Shell(context.Background(), session.Command{Script: `tail /dev/zero; echo "rc=$?"`}, session.ShellOptions{})
	require.NoError(t, err)
	assert.Equal(t, "rc=137\n", string(res.Stdout))
	assert.Contains(t, string(res.Stderr), "oma-sandbox: memory limit of 64 MiB reached: the kernel killed 1 process(es)")
	assert.Equal(t, 1, a.Served().Resident, "the attached session's call ran outside the resident sandbox")
	assert.Equal(t, first, readResident(s.dirs.Root).Cgroup, "the sandbox died of its call's memory")

	s.stopResident("")
	assert.Empty(t, groups(first), "the resident sandbox's groups outlived it")
	st, err = s.Stats(context.Background())
	require.NoError(t, err)
	assert.Nil(t, st.Uptime, "uptime of an ended sandbox")
	assert.Nil(t, st.MemoryBytes, "memory of an ended sandbox")
	rsh(t, s, `true`)
	second := readResident(s.dirs.Root).Cgroup
	assert.NotEqual(t, first, second)
	assert.NotEmpty(t, groups(second))
	require.NoError(t, s.Close(context.Background()))
	assert.Empty(t, groups(second), "Close left the resident sandbox's groups")
}

// Under an allowlist the resident sandbox's egress proxy is a process of
// its own, the sandbox's: a session attached to (as another process) is
// told of its refusals during its call, and the proxy ends when the
// sandbox is ended and when it dies.
func TestResidentEgressProxyEndsWithTheSandbox(t *testing.T) {
	if _, err := exec.LookPath("curl"); err != nil {
		t.Skip("curl not installed")
	}
	target, err := egress.ParseTarget("127.0.0.1:1")
	require.NoError(t, err)
	s := newResidentSession(t, Options{Policy: Policy{Network: NetworkAllowlist, Allow: []egress.Target{target}}})
	rsh(t, s, `true`)
	first := readResident(s.dirs.Root)
	require.NotZero(t, first.Proxy.PID, "no proxy recorded")
	require.Equal(t, first.Proxy, procOf(first.Proxy.PID), "the proxy is not running")

	a, err := Attach(context.Background(), filepath.Dir(s.dirs.Root), s.Name())
	require.NoError(t, err)
	a.agent = s.agent
	res, err := a.Shell(context.Background(), session.Command{Script: `curl -sS --max-time 5 http://127.0.0.1:2/; echo "rc=$?"`}, session.ShellOptions{})
	require.NoError(t, err)
	assert.Contains(t, string(res.Stdout), "oma-sandbox egress: refused 127.0.0.1:2: not in the allowlist")
	assert.Equal(t, "oma-sandbox: egress refused 127.0.0.1:2: not in the allowlist\n", string(res.Stderr))
	assert.Equal(t, 1, a.Served().Resident)

	s.stopResident("")
	assert.True(t, first.Proxy.exitsWithin(0), "the proxy outlived its sandbox's end")

	rsh(t, s, `true`)
	second := readResident(s.dirs.Root)
	require.NotZero(t, second.Proxy.PID)
	require.NoError(t, syscall.Kill(second.Bwrap.PID, syscall.SIGKILL))
	assert.True(t, second.Proxy.exitsWithin(10*time.Second), "the proxy outlived its sandbox's death")
}

// startTicker starts, in the background of a call, a process named marker
// that writes a count to the workspace's file .ticks every 10 ms, and
// returns advances, which tells whether the count moves in 300 ms.
func startTicker(t *testing.T, s *Session, marker string) (advances func() bool) {
	t.Helper()
	rsh(t, s, `rm -f .ticks; setsid bash -c 'exec -a `+marker+` bash -c "n=0; while :; do n=\$((n+1)); echo \$n > .ticks.new; mv .ticks.new .ticks; sleep 0.01; done"' >/dev/null 2>&1 </dev/null &
while [ ! -s .ticks ]; do sleep 0.01; done`)
	ticks := func() int {
		b, err := os.ReadFile(filepath.Join(s.dirs.Workspace, ".ticks"))
		require.NoError(t, err)
		n, err := strconv.Atoi(strings.TrimSpace(string(b)))
		require.NoError(t, err)
		return n
	}
	return func() bool {
		before := ticks()
		time.Sleep(300 * time.Millisecond)
		return ticks() > before
	}
}

// requireReaped reaps the stale sessions of state, s among them, and
// checks that nothing of s's sandbox runs on, the process named marker in
// it neither.
func requireReaped(t *testing.T, state string, s *Session, marker string) {
	t.Helper()
	rep, err := Reap(context.Background(), state, 0, time.Now().Add(time.Hour), false)
	require.NoError(t, err)
	require.Len(t, rep.Removed, 1, "%+v", rep)
	assert.Empty(t, procsWith(marker), "the reaper left the sandbox running")
	assert.Empty(t, procsWith(s.dirs.Workspace))
}

// Pause freezes the resident sandbox, whichever process started it: what
// runs in it stops where it is and goes on after a resume, in the same
// sandbox. A call on the paused session resumes it, or fails with
// ErrPaused when auto-resume is off; Stats says paused, to every process.
func TestPauseFreezesTheResidentSandbox(t *testing.T) {
	s := newResidentSession(t, Options{WorkspaceID: "ws", SessionID: "freeze"})
	ctx := context.Background()
	rsh(t, s, `: > /tmp/this-sandbox`)
	advances := startTicker(t, s, "oma-bg-ticker")
	require.True(t, advances(), "the ticker does not tick")

	a, err := Attach(ctx, filepath.Dir(s.dirs.Root), s.Name())
	require.NoError(t, err)
	a.agent = s.agent
	require.NoError(t, a.Pause(ctx))
	require.NoError(t, a.Pause(ctx), "pause is idempotent")
	assert.False(t, advances(), "a paused sandbox ran on")
	assert.NotEmpty(t, procsWith("oma-bg-ticker"), "pause ended the ticker")
	for _, x := range []*Session{s, a} {
		st, err := x.Stats(ctx)
		require.NoError(t, err)
		assert.Equal(t, session.StatePaused, st.State)
	}

	s.SetAutoResume(false)
	_, err = s.Shell(ctx, session.Command{Script: "true"}, session.ShellOptions{})
	require.ErrorIs(t, err, session.ErrPaused)
	assert.False(t, advances(), "a refused call resumed the session")
	s.SetAutoResume(true)
	assert.Equal(t, "same\n", rsh(t, s, `[ -e /tmp/this-sandbox ] && echo same || echo new`), "the call ran in a new sandbox")
	assert.True(t, advances(), "a call did not resume the session")
	st, err := a.Stats(ctx)
	require.NoError(t, err)
	assert.NotEqual(t, session.StatePaused, st.State)

	require.NoError(t, s.Pause(ctx))
	assert.False(t, advances())
	require.NoError(t, a.Resume(ctx))
	require.NoError(t, a.Resume(ctx), "resume is idempotent")
	assert.True(t, advances(), "resume did not thaw the sandbox")

	// A paused sandbox ended (by Poison, Resize, Close) dies at once, with
	// everything in it, frozen as it was.
	require.NoError(t, s.Pause(ctx))
	require.NoError(t, endRecorded(s.dirs.Root), "ending the paused sandbox")
	assert.Empty(t, procsWith("oma-bg-ticker"), "ending a paused sandbox left its processes")
	assert.Empty(t, agentsOf(s))
	require.NoError(t, s.Close(ctx))
}

// Pause freezes the sandbox while another process's calls start processes
// in it, every time: on cgroup v1 one freeze in twenty to a hundred here
// stayed FREEZING with every task frozen until the deadline, and the pause
// then ended the sandbox, background processes and all.
func TestPauseFreezesUnderLoad(t *testing.T) {
	s := newResidentSession(t, Options{WorkspaceID: "ws", SessionID: "freeze-load"})
	ctx := context.Background()
	advances := startTicker(t, s, "oma-bg-load")
	a := attachWithThisAgent(t, s)
	stop := make(chan struct{})
	var load sync.WaitGroup
	for range 3 {
		load.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				_, _ = a.Shell(ctx, session.Command{Script: "true"}, session.ShellOptions{})
			}
		})
	}
	defer load.Wait()
	defer close(stop)
	for i := range 100 {
		require.NoError(t, s.Pause(ctx))
		require.NotEmpty(t, procsWith("oma-bg-load"), "pause %d ended the sandbox", i)
		require.NoError(t, s.Resume(ctx))
	}
	assert.True(t, advances(), "the sandbox runs on")
}

// A paused session whose process is gone is the reaper's like any other:
// its frozen sandbox ends.
func TestReapEndsAPausedSandbox(t *testing.T) {
	state := t.TempDir()
	s := newResidentSession(t, Options{StateDir: state, WorkspaceID: "ws", SessionID: "reap-paused"})
	startTicker(t, s, "oma-bg-reap-paused")
	require.NoError(t, s.Pause(context.Background()))
	require.NotEmpty(t, procsWith("oma-bg-reap-paused"))
	requireReaped(t, state, s, "oma-bg-reap-paused")
}

// A fork copies a workspace at rest: the source's sandbox is frozen while
// the copy is made, and runs on after it; a source paused before or while
// it copies (by another process) stays paused.
func TestForkFreezesTheSourceWhileItCopies(t *testing.T) {
	s := newResidentSession(t, Options{WorkspaceID: "ws", SessionID: "fork-src"})
	ctx := context.Background()
	advances := startTicker(t, s, "oma-bg-fork-src")
	a, err := Attach(ctx, filepath.Dir(s.dirs.Root), s.Name())
	require.NoError(t, err)
	copying, pauseWhileCopying := 0, false
	real := copyWorkspace
	t.Cleanup(func() { copyWorkspace = real })
	copyWorkspace = func(ctx context.Context, src, dst string, limit int64) ([]string, error) {
		copying++
		assert.False(t, advances(), "the source ran on while its workspace was copied")
		if pauseWhileCopying {
			require.NoError(t, a.Pause(ctx))
		}
		return real(ctx, src, dst, limit)
	}
	for i, c := range []struct{ before, during bool }{{false, false}, {true, false}, {false, true}} {
		if c.before {
			require.NoError(t, s.Pause(ctx))
		}
		pauseWhileCopying = c.during
		f, err := s.Fork(ctx, ForkOptions{SessionID: fmt.Sprintf("fork-%d", i)})
		require.NoError(t, err)
		require.NoError(t, f.Close(ctx))
		assert.Equal(t, i+1, copying)
		assert.Equal(t, !c.before && !c.during, advances(), "paused before the fork: %v, during it: %v", c.before, c.during)
		require.NoError(t, s.Resume(ctx))
	}
	assert.True(t, advances())
}

// A session's process limit binds its resident sandbox's calls, all of
// them together, and not the agent: while a call holds the limit used up,
// a builtin still runs; the call is told of the limit; the sandbox serves
// on; what the calls start is in the sandbox's commands group.
func TestResidentSandboxHoldsTheSessionsProcessLimit(t *testing.T) {
	s := newResidentSession(t, Options{Limits: Limits{Processes: 24}})
	ctx := context.Background()
	require.Contains(t, rsh(t, s, `cat /proc/self/cgroup; echo kept > note.txt`), "/"+commandsLeaf+"\n", "a call's command outside the commands group")
	first := readResident(s.dirs.Root)
	type result struct {
		res *session.Result
		err error
	}
	bomb := make(chan result, 1)
	go func() {
		res, err := s.Shell(ctx, session.Command{Script: `for i in $(seq 40); do sleep 30 & done 2>/dev/null; wait`},
			session.ShellOptions{GuestTimeout: 3 * time.Second})
		bomb <- result{res, err}
	}()
	time.Sleep(time.Second)
	for range 3 {
		out, err := s.Shell(ctx, session.Command{Builtin: "cat", Args: []string{"/workspace/note.txt", "/workspace", "note.txt"}}, session.ShellOptions{})
		require.NoError(t, err)
		assert.Equal(t, "kept\n", string(out.Stdout), "stderr %q", out.Stderr)
	}
	r := <-bomb
	require.ErrorIs(t, r.err, session.ErrGuestTimeout)
	assert.Contains(t, string(r.res.Stderr), "oma-sandbox: process limit of 24 reached:")
	assert.Equal(t, "ok\n", rsh(t, s, `echo ok`))
	assert.Equal(t, 6, s.Served().Resident, "the process limit kept a call out of the resident sandbox")
	assert.Equal(t, first, readResident(s.dirs.Root), "the sandbox did not survive its calls' limit")
	require.NoError(t, s.Close(ctx))
}

// A compromised agent holds the descriptor that moves a command into the
// process limit's group, which host root opened (the kernel checks the
// opener). It names processes in the agent's own pid namespace only: a host
// process's pid, written through that very open file from the agent's pid
// namespace, moves nothing, while a process of that namespace moves.
func TestAgentsGroupDescriptorReachesNoHostProcess(t *testing.T) {
	s := newResidentSession(t, Options{Limits: Limits{Processes: 24}})
	if _, err := exec.LookPath("nsenter"); err != nil {
		t.Skip("nsenter (util-linux) is not installed")
	}
	rsh(t, s, `true`)
	agent, fd := commandsDescriptor(t, readResident(s.dirs.Root).Cgroup)
	pidfd, err := unix.PidfdOpen(agent, 0)
	require.NoError(t, err)
	defer unix.Close(pidfd)
	dup, err := unix.PidfdGetfd(pidfd, fd, 0) // the agent's open file, not one opened again
	require.NoError(t, err)
	procs := os.NewFile(uintptr(dup), "commands/cgroup.procs")
	defer procs.Close()

	host := exec.Command("sleep", "60")
	require.NoError(t, host.Start())
	defer func() { _ = host.Process.Kill(); _ = host.Wait() }()
	before := cgroupsOf(t, host.Process.Pid)
	// asAgent runs script with the descriptor as fd 3 in the agent's pid
	// namespace.
	asAgent := func(script string) (string, error) {
		cmd := exec.Command("nsenter", "--pid=/proc/"+strconv.Itoa(agent)+"/ns/pid", "--", "/bin/sh", "-c", script)
		cmd.ExtraFiles = []*os.File{procs}
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	out, err := asAgent(fmt.Sprintf(`echo %d >&3`, host.Process.Pid))
	assert.Error(t, err, "a host pid was written through the agent's descriptor: %s", out)
	assert.Equal(t, before, cgroupsOf(t, host.Process.Pid), "a host process moved into the sandbox's group")

	out, err = asAgent(`echo $$ >&3 && cat /proc/self/cgroup`)
	require.NoError(t, err, "a process of the agent's namespace could not join: %s", out)
	assert.Contains(t, out, "/"+commandsLeaf+"\n", "the descriptor did not move a process of the agent's namespace")
	require.NoError(t, s.Close(context.Background()))
}

// commandsDescriptor finds the process holding the commands/cgroup.procs
// of the resident sandbox whose groups are named group open (its agent),
// and the descriptor's number.
func commandsDescriptor(t *testing.T, group string) (pid, fd int) {
	t.Helper()
	dirs, _ := filepath.Glob("/proc/[0-9]*/fd")
	for _, dir := range dirs {
		ents, _ := os.ReadDir(dir)
		for _, e := range ents {
			target, _ := os.Readlink(filepath.Join(dir, e.Name()))
			if strings.HasSuffix(target, "/"+group+"/"+commandsLeaf+"/cgroup.procs") {
				pid, _ = strconv.Atoi(strings.Split(dir, "/")[2])
				fd, _ = strconv.Atoi(e.Name())
				return pid, fd
			}
		}
	}
	t.Fatalf("no process holds %s/%s/cgroup.procs open", group, commandsLeaf)
	return 0, 0
}

// cgroupsOf is /proc/PID/cgroup.
func cgroupsOf(t *testing.T, pid int) string {
	t.Helper()
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", pid))
	require.NoError(t, err)
	return string(data)
}

// A Pause cancelled while it waits for the sandbox (another process holds
// the resident lock) pauses nothing and ends nothing.
func TestCancelledPauseChangesNothing(t *testing.T) {
	s := newResidentSession(t, Options{WorkspaceID: "ws", SessionID: "pause-cancel"})
	advances := startTicker(t, s, "oma-bg-pause-cancel")
	unlock, err := lockResident(context.Background(), s.dirs.Root)
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	err = s.Pause(ctx)
	unlock()
	require.ErrorIs(t, err, session.ErrHostTimeout)
	assert.False(t, s.paused(), "a cancelled pause left the session marked paused")
	assert.True(t, advances(), "a cancelled pause stopped the sandbox")
	require.NoError(t, s.Close(context.Background()))
}

// countCgroupReads counts this process's reads of the cgroup layout until
// the test ends.
func countCgroupReads(t *testing.T) *atomic.Int32 {
	var reads atomic.Int32
	cgroupsMu.Lock()
	read := detectCgroups
	detectCgroups = func() cgLayout { reads.Add(1); return read() }
	cgroupsMu.Unlock()
	t.Cleanup(func() {
		cgroupsMu.Lock()
		detectCgroups = read
		cgroupsMu.Unlock()
	})
	return &reads
}

// Attach reads the host's cgroup layout afresh, once, so that a kept
// proof never holds for a layout since changed; calling the session,
// pausing, resuming, reading its stats and closing it use that read.
func TestCgroupLayoutIsReadAtAttachNotByCalls(t *testing.T) {
	reads := countCgroupReads(t)
	ctx := context.Background()
	s := newResidentSession(t, Options{Limits: Limits{MemoryBytes: 64 << 20, Processes: 64}})
	assert.NotZero(t, reads.Load(), "Create did not read the cgroup layout")
	reads.Store(0)
	rsh(t, s, `true`)
	require.NotEmpty(t, readResident(s.dirs.Root).Cgroup, "the resident sandbox has no groups")
	assert.Zero(t, reads.Load(), "a call read the cgroup layout")

	reads.Store(0)
	a, err := Attach(ctx, filepath.Dir(s.dirs.Root), s.Name())
	require.NoError(t, err)
	assert.EqualValues(t, 1, reads.Load(), "Attach (recalling the kept proof) read the cgroup layout other than once")

	reads.Store(0)
	a.agent = s.agent
	rsh(t, a, `true`)
	require.NoError(t, a.Pause(ctx))
	_, err = a.Stats(ctx)
	require.NoError(t, err)
	require.NoError(t, a.Resume(ctx))
	require.NoError(t, s.Close(ctx))
	assert.Zero(t, reads.Load(), "calls, Pause, Stats, Resume or Close read the cgroup layout")
}

// latestCgroups is the layout last read, reading it only when none was;
// readCgroups reads it every time and replaces the latest.
func TestLatestCgroupsIsTheLastRead(t *testing.T) {
	reads := 0 // under cgroupsMu, as detectCgroups is called
	cgroupsMu.Lock()
	detect, wasRead, was := detectCgroups, cgroupsRead, cgroupsLast
	detectCgroups = func() cgLayout { reads++; return cgLayout{v2: fmt.Sprint("layout ", reads)} }
	cgroupsRead, cgroupsLast = false, cgLayout{}
	cgroupsMu.Unlock()
	t.Cleanup(func() {
		cgroupsMu.Lock()
		detectCgroups, cgroupsRead, cgroupsLast = detect, wasRead, was
		cgroupsMu.Unlock()
	})

	assert.Equal(t, "layout 1", latestCgroups().v2, "none read yet: read now")
	assert.Equal(t, "layout 1", latestCgroups().v2, "read again")
	assert.Equal(t, "layout 2", readCgroups().v2, "not read afresh")
	assert.Equal(t, "layout 2", latestCgroups().v2, "not the latest read")
}

// A call this process admitted just before another paused the session
// (past its wake) neither starts a resident sandbox under the pause, which
// would run on unfrozen in a session every process sees paused, nor
// gives up the session's resident sandbox for good; it fails with
// ErrPaused, and the next call resumes the session as ever.
func TestNoResidentSandboxStartsUnderAPause(t *testing.T) {
	s := newResidentSession(t, Options{})
	ctx := context.Background()
	a, err := Attach(ctx, filepath.Dir(s.dirs.Root), s.Name())
	require.NoError(t, err)
	a.agent = s.agent
	require.NoError(t, a.Pause(ctx))
	assert.ErrorIs(t, admittedCall(t, s), session.ErrPaused)
	_, running := runningResident(s.dirs.Root)
	assert.False(t, running, "a resident sandbox started in a paused session")
	assert.Equal(t, "x\n", rsh(t, s, "echo x"))
	_, running = runningResident(s.dirs.Root)
	assert.True(t, running, "the call after the pause ran in a sandbox of its own")
}

// admittedCall asks s for a resident sandbox as a call already past its
// pause check does, and returns what it answered.
func admittedCall(t *testing.T, s *Session) error {
	workdir, err := s.workdir("")
	require.NoError(t, err)
	c := call{name: s.rec.Name, dirs: s.dirs, policy: s.rec.Policy, limits: s.limits(),
		env: s.env, workdir: workdir, argv: []string{"/bin/bash", "-c", "true", "bash"}}
	cur, err := s.residentSandbox(context.Background(), c)
	if cur != nil {
		s.res.leave()
	}
	return err
}

// A call this process admitted just before another paused the session
// does not take the frozen sandbox, whose agent cannot answer, for a
// broken one: the process keeps its resident sandbox for later calls.
func TestAFrozenResidentSandboxIsNotGivenUp(t *testing.T) {
	s := newResidentSession(t, Options{})
	ctx := context.Background()
	rsh(t, s, "true")
	if !latestCgroups().canFreeze() {
		t.Skip("this host cannot freeze a sandbox")
	}
	b, err := Attach(ctx, filepath.Dir(s.dirs.Root), s.Name())
	require.NoError(t, err)
	b.agent = s.agent
	require.NoError(t, s.Pause(ctx))
	assert.ErrorIs(t, admittedCall(t, b), session.ErrPaused)
	assert.True(t, b.mayBeResident(), "the process gave up its resident sandbox")
}

// A fork freezes its source's sandbox while it copies: another process's
// first call meanwhile, whose agent cannot answer, does not take the
// sandbox for a broken one; the call runs, and the process's later calls
// run in the resident sandbox again.
func TestAForkDoesNotCostAnotherProcessItsResidentSandbox(t *testing.T) {
	s := newResidentSession(t, Options{WorkspaceID: "ws", SessionID: "fork-other"})
	ctx := context.Background()
	rsh(t, s, `: > /tmp/this-sandbox`)
	if !latestCgroups().canFreeze() {
		t.Skip("this host cannot freeze a sandbox")
	}
	b, err := Attach(ctx, filepath.Dir(s.dirs.Root), s.Name())
	require.NoError(t, err)
	b.agent = s.agent
	real := copyWorkspace
	t.Cleanup(func() { copyWorkspace = real })
	copyWorkspace = func(ctx context.Context, src, dst string, limit int64) ([]string, error) {
		assert.Equal(t, "x\n", rsh(t, b, "echo x"))
		assert.True(t, readResident(s.dirs.Root).frozen(s.dirs.Root), "another process's call thawed the sandbox a fork copies")
		return real(ctx, src, dst, limit)
	}
	f, err := s.Fork(ctx, ForkOptions{SessionID: "forked"})
	require.NoError(t, err)
	require.NoError(t, f.Close(ctx))
	assert.True(t, b.mayBeResident(), "the fork cost the other process its resident sandbox")
	assert.Equal(t, "same\n", rsh(t, b, `[ -e /tmp/this-sandbox ] && echo same || echo new`))
}

// A fork that dies while it copies leaves the resident sandbox frozen
// and no pause: the next call, of any process, thaws it and runs in it.
func TestAForkThatDiedLeavesNoSandboxFrozen(t *testing.T) {
	s := newResidentSession(t, Options{WorkspaceID: "ws", SessionID: "fork-died"})
	ctx := context.Background()
	rsh(t, s, `: > /tmp/this-sandbox`)
	if !latestCgroups().canFreeze() {
		t.Skip("this host cannot freeze a sandbox")
	}
	root := s.dirs.Root
	// What the fork did before it died: froze the sandbox, its lock
	// ending with it.
	frozen, err := freezeResident(ctx, root, true, s.opTimeout(), nil)
	require.NoError(t, err)
	require.True(t, frozen)
	b, err := Attach(ctx, filepath.Dir(root), s.Name())
	require.NoError(t, err)
	b.agent = s.agent
	assert.Equal(t, "same\n", rsh(t, b, `[ -e /tmp/this-sandbox ] && echo same || echo new`))
	assert.False(t, readResident(root).frozen(root), "the sandbox is still frozen")
	assert.True(t, b.mayBeResident())
}
